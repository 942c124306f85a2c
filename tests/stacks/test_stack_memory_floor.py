"""The seed's cross-node OOMKill is caught at preview. With kv_buffer_device cpu vLLM 0.31.0
gives the worker a host mirror of its whole KV cache, so its memory limit must cover base +
/dev/shm + mirror, whatever the load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import testbed.render
from stackmodel.errors import StackConfigError
from stackmodel.validation import validate_stack
from testbed.cli import app
from testbed.render import Rendered, render_stack

STACK = "disagg-cross-node"
SEED_LIMIT = "3584Mi"
# base 3,328Mi + /dev/shm 256Mi (3,758,096,384 B together) + the mirror of the prefill worker's
# KV cache: floor(0.85 x 8 GiB) - 1,192,099,840 B weights - 1 GiB = 5,035,602,739 B, 2,744 blocks
# of 1,835,008 B = 5,035,261,952 B; floor 8,793,358,336 B = 8,386Mi.
FORMULA = (
    "base 3328Mi + /dev/shm 256Mi + host mirror 4802Mi (5,035,261,952 B) = 8386Mi (8,793,358,336 B)"
)
REQUIRED = "is below the floor"


def seed_config(raw: dict[str, Any]) -> dict[str, Any]:
    """The shipped stack with the seed's prefill limit, loaded at concurrency 4 only."""
    assert raw["topology"]["workers"][0]["name"] == "prefill"
    raw["topology"]["workers"][0]["memoryLimit"] = SEED_LIMIT
    raw["load"]["concurrency"] = [4]
    return raw


def test_seed_limit_fails_with_the_required_value_and_formula(
    raw_config: Callable[[str], dict[str, Any]],
) -> None:
    with pytest.raises(StackConfigError) as info:
        validate_stack(STACK, seed_config(raw_config(STACK)))
    (problem,) = info.value.problems
    assert problem.key == "topology.workers[0].memoryLimit"
    assert problem.value == SEED_LIMIT
    text = str(info.value)
    assert text.startswith(f"stack '{STACK}': invalid config (1 problem)")
    assert "dynamo-testbed:topology.workers[0].memoryLimit = '3584Mi'" in text
    assert "memory limit 3584Mi (3,758,096,384 B)" in text
    assert REQUIRED in text
    assert FORMULA in text


def test_the_floor_does_not_depend_on_the_load(
    raw_config: Callable[[str], dict[str, Any]],
) -> None:
    raw = raw_config(STACK)
    raw["topology"]["workers"][0]["memoryLimit"] = SEED_LIMIT
    raw["load"]["concurrency"] = [1]
    with pytest.raises(StackConfigError) as info:
        validate_stack(STACK, raw)
    assert FORMULA in str(info.value)


def test_lower_gpu_memory_utilization_lowers_the_floor(
    raw_config: Callable[[str], dict[str, Any]],
) -> None:
    raw = raw_config(STACK)
    # floor(0.5 x 8 GiB) - weights - 1 GiB = 2,029,125,632 B: 1,105 blocks = 2,027,683,840 B;
    # + 3,758,096,384 B = 5,785,780,224 B = 5,517.75Mi, under 6Gi.
    raw["topology"]["workers"][0]["gpuMemoryUtilization"] = 0.5
    raw["topology"]["workers"][0]["memoryLimit"] = "6Gi"
    validate_stack(STACK, raw)
    raw["topology"]["workers"][0]["memoryLimit"] = "5517Mi"
    with pytest.raises(StackConfigError, match="5518Mi"):
        validate_stack(STACK, raw)


def test_seed_limit_fails_testbed_render_with_exit_2(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    project = project_with(STACK, seed_config(raw_config(STACK)))
    monkeypatch.setattr(
        testbed.render, "render_stack", lambda stack, *_, **kw: render_stack(stack, project, **kw)
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["render", STACK, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert f"stack '{STACK}': invalid config" in result.output
    assert "topology.workers[0].memoryLimit" in result.output
    assert REQUIRED in result.output
    assert FORMULA in result.output
    assert not out.exists()  # nothing written


def test_allow_unsafe_memory_renders_with_a_warning(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    raw = seed_config(raw_config(STACK))
    raw["sizing"] = {"allowUnsafeMemory": True}
    rendered = render_stack(STACK, project_with(STACK, raw))
    (warning,) = rendered.outputs["warnings"]
    assert "worker group 'prefill'" in warning
    assert REQUIRED in warning
    assert "allowUnsafeMemory is set, so it is deployed anyway" in warning
    assert "OOMKilled" in warning
    components = {c["name"]: c for c in rendered.outputs["sizing"]["components"]}
    assert components["prefill"]["fits"] is False
    assert components["prefill"]["memory_floor_quantity"] == "8386Mi"
    assert components["decode"]["fits"] is True
    (dgd,) = [o for o in rendered.kubernetes_objects() if o["kind"] == "DynamoGraphDeployment"]
    prefill = next(c for c in dgd["spec"]["components"] if c["name"] == "prefill")
    limits = prefill["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == SEED_LIMIT  # deployed as configured


def test_shipped_stack_passes(rendered: dict[str, Rendered]) -> None:
    outputs = rendered[STACK].outputs
    assert outputs["warnings"] == []
    components = {c["name"]: c for c in outputs["sizing"]["components"]}
    assert components["prefill"]["memory_limit_bytes"] == 9 * 2**30
    assert components["prefill"]["fits"] is True
