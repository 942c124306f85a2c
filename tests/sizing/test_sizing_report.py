"""The `sizing` stack output: built from plain inputs, JSON-ready, units in the key names."""

import json

import pytest

from stackmodel.models import known_model
from stackmodel.sizing import (
    ComponentMemory,
    GpuAllocation,
    GpuWorker,
    SizingReport,
    build_sizing_report,
)

QWEN3_0_6B = known_model("Qwen/Qwen3-0.6B")


def cross_node_report(prefill_limit: str, *, allow_unsafe_memory: bool = False) -> SizingReport:
    """The seed's disagg-cross-node stack: 1 prefill on the 8 GB server, 2 decode on 24 GB."""
    return build_sizing_report(
        model="Qwen/Qwen3-0.6B",
        geometry=QWEN3_0_6B,
        prompt_tokens=2_371,
        concurrency=4,
        link="1gbe",
        prefill_tokens_per_s=25_000,
        prefill_source="test",
        components=[
            ComponentMemory(
                name="frontend", memory_limit="1Gi", host_buffers_kv=False, base_memory="512Mi"
            ),
            ComponentMemory.model_validate(
                {"name": "prefill", "memoryLimit": prefill_limit, "hostBuffersKv": True}
            ),
            ComponentMemory(name="decode", memory_limit="12Gi", host_buffers_kv=True),
        ],
        gpus=[
            GpuAllocation(
                node_class="gpu-8gb",
                gpu_memory_gib=8,
                workers=[GpuWorker(name="prefill-0", gpu_memory_utilization=0.8)],
            ),
            GpuAllocation.model_validate(
                {
                    "nodeClass": "gpu-24gb",
                    "gpuMemoryGib": 24,
                    "workers": [
                        {"name": "decode-0", "gpuMemoryUtilization": 0.4},
                        {"name": "decode-1", "gpuMemoryUtilization": 0.4},
                    ],
                }
            ),
        ],
        kv_workers=[
            GpuAllocation(
                node_class="gpu-8gb",
                gpu_memory_gib=8,
                workers=[GpuWorker(name="prefill", gpu_memory_utilization=0.8)],
            ),
            GpuAllocation(
                node_class="gpu-24gb",
                gpu_memory_gib=24,
                workers=[GpuWorker(name="decode", gpu_memory_utilization=0.4)],
            ),
        ],
        allow_unsafe_memory=allow_unsafe_memory,
    )


def test_seed_cross_node_limit_is_an_error_in_the_report() -> None:
    report = cross_node_report("3584Mi")
    assert [(f.subject, f.severity) for f in report.findings] == [("prefill", "error")]
    assert report.errors == report.findings
    prefill = report.components[1]
    # floor(0.8 x 8 GiB) - 1,192,099,840 B weights - 1 GiB = 4,606,106,009 B of KV cache: 2,510
    # blocks of 1,835,008 B = a 4,605,870,080 B mirror, + 3,584Mi base and /dev/shm.
    assert prefill.host_mirror_bytes == 4_605_870_080
    assert (prefill.memory_floor_bytes, prefill.memory_floor_quantity) == (8_363_966_464, "7977Mi")
    assert prefill.memory_floor_mib == 7_977
    assert not prefill.fits
    # decode: floor(0.4 x 24 GiB) - weights - 1 GiB = 4,382 blocks; 12Gi holds its 11,253Mi floor.
    decode = report.components[2]
    assert (decode.host_mirror_bytes, decode.memory_floor_bytes) == (8_041_005_056, 11_799_101_440)
    assert decode.fits
    # Without host-buffered KV the floor is base memory + /dev/shm (default 256Mi).
    frontend = report.components[0]
    assert (frontend.memory_floor_bytes, frontend.fits) == ((512 + 256) * 2**20, True)
    assert frontend.shared_memory_bytes == 256 * 2**20


def test_override_leaves_only_a_warning() -> None:
    report = cross_node_report("3584Mi", allow_unsafe_memory=True)
    assert [f.severity for f in report.findings] == ["warning"]
    assert report.errors == []


def test_the_rule_computed_limit_passes() -> None:
    floor = cross_node_report("3584Mi").components[1].memory_floor_quantity
    assert floor is not None
    report = cross_node_report(floor)
    assert report.findings == []
    assert all(c.fits for c in report.components)


def test_report_numbers_and_json_keys() -> None:
    report = cross_node_report("8Gi")
    assert report.kv_bytes_per_token == 114_688
    assert report.kv_bytes_per_request == 271_925_248
    assert report.kv_mb_per_request == pytest.approx(271.925248)
    assert 2.3 <= report.disaggregation.transfer_seconds <= 2.5
    # vLLM's copies at the default rates (docs/kv-path.md): d2h resident 134 ms + h2d 179 ms for
    # 273,416,192 B.
    assert report.disaggregation.copy_seconds == pytest.approx(
        271_925_248 / 273_416_192 * (0.134 + 0.179)
    )
    assert not report.disaggregation.disaggregation_pays
    assert report.disaggregation.prefill_tokens_per_s == 25_000
    decode = report.workers[1]
    budget = int(24 * 2**30 * 0.4) - QWEN3_0_6B.weight_bytes - 2**30
    assert (decode.node_class, decode.kv_cache_budget_bytes) == ("gpu-24gb", budget)
    assert decode.kv_capacity_blocks == budget // (114_688 * 16)
    dumped = json.loads(json.dumps(report.model_dump()))
    assert {"kv_bytes_per_token", "kv_bytes_per_request", "concurrency"} <= dumped.keys()
    component_keys = dumped["components"][0].keys()
    assert {"memory_limit_bytes", "memory_floor_bytes", "memory_floor_mib"} <= component_keys
    assert {"transfer_seconds", "prefill_seconds"} <= dumped["disaggregation"].keys()
    assert SizingReport.model_validate(dumped) == report


def test_bad_inputs_raise() -> None:
    with pytest.raises(ValueError, match="quantity"):
        cross_node_report("lots")
    with pytest.raises(ValueError, match="link profile"):
        build_sizing_report(
            model="m",
            geometry=QWEN3_0_6B,
            prompt_tokens=1,
            concurrency=1,
            link="wifi",
            prefill_tokens_per_s=1,
            prefill_source="test",
        )
