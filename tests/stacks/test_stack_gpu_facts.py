"""A GPU's facts come from its one catalog entry (:data:`steptime.gpus.GPU_CATALOG`): a GPU
added there alone has its datasheet memory checked, its AIConfigurator efficiencies used and
vLLM's step-budget default read from its device name; one given inline without them is
unknown to each of those readers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from stackmodel.errors import StackConfigError
from stackmodel.plan import StackPlan
from stackmodel.stack_warnings import overlap_warnings
from stackmodel.validation import validate_stack
from steptime.gpus import GPU_CATALOG, GpuSpec

FIGURES = {"name": "zz-96", "bf16DenseTflops": 500, "memoryGbPerS": 3_000}
"""A made-up GPU's roofline figures; its label has no "a100"."""

MADE_UP = GpuSpec.model_validate(
    FIGURES
    | {
        "memoryGb": 96,
        "deviceName": "NVIDIA A100X 96GB",
        "aiconfigurator": {
            "system": "zz_sxm",
            "prefillEfficiency": 0.5,
            "weightsEfficiency": 0.6,
            "kvEfficiency": 0.7,
        },
        "source": "made up for this test",
    }
)
"""The made-up GPU's catalog entry: 96 GB, a device name with "A100", AIConfigurator data."""


def _plan(raw: dict[str, Any], gpu: object, memory_gib: float) -> StackPlan:
    raw["nodeClasses"]["gpu-24gb"].update(gpu=gpu, gpuMemoryGiB=memory_gib)
    for worker in raw["topology"]["workers"]:  # room for the token tables of 1,024 slots
        worker["memoryLimit"] = "4Gi"
    return validate_stack("zz", raw)


def _first_group(plan: StackPlan) -> Any:
    return plan.group(plan.cfg.topology.workers[0].name)


def test_a_gpu_added_to_the_catalog_alone_is_read_by_every_consumer(
    raw_config: Callable[[str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(GPU_CATALOG, "zz-96", MADE_UP)
    raw = raw_config("kv-routing")
    group = _first_group(_plan(raw, "zz-96", 96))
    # vLLM tests the device name for "a100", not the label: 2,048 tokens a step, not 8,192
    assert group.max_batched_tokens == 2_048
    fit = group.step.fit
    assert fit.label == "AIConfigurator" and "vLLM data of zz_sxm;" in fit.source
    assert (fit.prefill_efficiency, fit.weights_efficiency, fit.kv_efficiency) == (0.5, 0.6, 0.7)
    # the datasheet's 96 GB: more is refused, well under it warned about
    with pytest.raises(StackConfigError, match=r"above the zz-96's 96 GB \(its datasheet\)"):
        _plan(raw, "zz-96", 100)
    (warning,) = [w.render() for w in overlap_warnings(_plan(raw, "zz-96", 48).cfg)]
    assert "gpuMemoryGiB = 48 but its gpu, zz-96, has 96 GB" in warning


def test_a_gpu_given_inline_has_the_facts_it_gives_and_no_others(
    raw_config: Callable[[str], dict[str, Any]],
) -> None:
    raw = raw_config("kv-routing")
    # the same entry inline reads the same
    given = MADE_UP.model_dump(by_alias=True, exclude_none=True)
    group = _first_group(_plan(raw, given, 96))
    assert group.max_batched_tokens == 2_048 and group.step.fit.label == "AIConfigurator"
    with pytest.raises(StackConfigError, match=r"above the zz-96's 96 GB"):
        _plan(raw, given, 100)
    # figures only: no datasheet memory to check, the label tested for "a100", the seed fit
    bare = _plan(raw, FIGURES, 100)
    assert _first_group(bare).max_batched_tokens == 8_192
    assert _first_group(bare).step.fit.label == "seed fit"
    assert overlap_warnings(_plan(raw, FIGURES, 24).cfg) == []
    labelled = _first_group(_plan(raw, FIGURES | {"name": "my-a100"}, 80))
    assert labelled.max_batched_tokens == 2_048
