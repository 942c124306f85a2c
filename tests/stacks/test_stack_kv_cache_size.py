"""One KV-cache size per worker: sizing computes it, vLLM gets it as --kv-cache-memory-bytes (so
it does not profile free GPU memory at startup, which other workers starting on a time-sliced GPU
disturb), the mocker gets it as --num-gpu-blocks-override, and `testbed simulate` uses the same
number."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_stack_render import arg_value, components, main_container, objects_of

from simulator.routing import graph_spec
from stackmodel.errors import StackConfigError
from stackmodel.models import known_model
from stackmodel.quantities import GI, MOCKER_BLOCK_SIZE_TOKENS
from stackmodel.topology import build_topology
from stackmodel.validation import validate_stack
from testbed.render import Rendered, render_stack

QWEN3_0_6B = known_model("Qwen/Qwen3-0.6B")
Raw = dict[str, Any]
DYNAMO_STACKS = ("disagg-cross-node", "disagg-same-node", "kv-routing")


def sizing_rows(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """The ``sizing`` output's KV rows by worker group."""
    return {w["name"]: w for w in rendered.outputs["sizing"]["workers"]}


@pytest.mark.parametrize("stack", DYNAMO_STACKS)
def test_every_dgd_worker_gets_the_kv_size_of_the_sizing_output(
    rendered: dict[str, Rendered], stack: str
) -> None:
    rows = sizing_rows(rendered[stack])
    workers = {n: c for n, c in components(rendered[stack]).items() if c["type"] != "frontend"}
    assert set(workers) == set(rows)
    for name, component in workers.items():
        args = main_container(component["podTemplate"]["spec"])["args"]
        assert (
            int(arg_value(args, "--kv-cache-memory-bytes")) == rows[name]["kv_cache_budget_bytes"]
        )
        assert (
            float(arg_value(args, "--gpu-memory-utilization"))
            == rows[name]["gpu_memory_utilization"]
        )


def test_the_cross_node_prefill_size_is_its_share_minus_weights_and_overhead(
    rendered: dict[str, Rendered],
) -> None:
    # prefill: gpuMemoryUtilization 0.85 of the 8 GiB GPU, alone on it.
    expected = math.floor(8 * GI * 0.85) - QWEN3_0_6B.weight_bytes - 1 * GI
    row = sizing_rows(rendered["disagg-cross-node"])["prefill"]
    assert row["kv_cache_budget_bytes"] == expected
    assert row["kv_capacity_tokens"] == expected // 114_688
    args = main_container(
        components(rendered["disagg-cross-node"])["prefill"]["podTemplate"]["spec"]
    )["args"]
    assert arg_value(args, "--kv-cache-memory-bytes") == str(expected)


def test_vllm_service_deployments_get_the_same_flag(rendered: dict[str, Rendered]) -> None:
    rows = sizing_rows(rendered["vllm-service"])
    deployments = objects_of(rendered["vllm-service"], "Deployment")
    assert len(deployments) == len(rows) == 2
    for deployment in deployments:
        group = deployment["metadata"]["labels"]["dynamo-testbed/component"]
        args = main_container(deployment["spec"]["template"]["spec"])["args"]
        assert (
            int(arg_value(args, "--kv-cache-memory-bytes")) == rows[group]["kv_cache_budget_bytes"]
        )


def test_mocker_graph_and_simulation_use_one_block_count(
    raw_config: Callable[[str], Raw], project_with: Callable[[str, Raw], Path]
) -> None:
    stack = "disagg-cross-node"
    raw = raw_config(stack)
    raw["engine"] = {"kind": "mocker"}
    rendered = render_stack(stack, project_with(stack, raw))
    cfg = validate_stack(stack, raw)
    simulated = {g.name: g.num_gpu_blocks for g in graph_spec(cfg).groups}
    sizing = cfg.sizing
    for name, component in components(rendered).items():
        if component["type"] == "frontend":
            continue
        args = main_container(component["podTemplate"]["spec"])["args"]
        blocks = int(arg_value(args, "--num-gpu-blocks-override"))
        assert blocks == simulated[name] == sizing.gpu_blocks(name, MOCKER_BLOCK_SIZE_TOKENS)
        assert blocks == sizing.kv_capacity_tokens(name) // 64 > 0
        assert "--kv-cache-memory-bytes" not in args  # not a mocker flag


def test_a_group_outside_the_checked_sharing_set_still_gets_its_size(
    raw_config: Callable[[str], Raw],
) -> None:
    """Time-slicing checks the workers with the biggest shares; a smaller group sharing the class
    still needs its own KV size (its budget depends only on its own share)."""
    raw = raw_config("kv-routing")
    raw["nodeClasses"]["gpu-24gb"]["nodes"] = 2
    raw["nodeClasses"]["gpu-24gb"]["timeSlicing"]["replicasPerGpu"] = 2
    workers = raw["topology"]["workers"]
    workers[0].update(replicas=3, gpuMemoryUtilization=0.45)
    workers.append({**workers[0], "name": "small", "replicas": 1, "gpuMemoryUtilization": 0.3})
    cfg = validate_stack("kv-routing", raw)
    sizing = cfg.sizing
    expected = math.floor(24 * GI * 0.3) - QWEN3_0_6B.weight_bytes - 1 * GI
    assert sizing.kv_cache_bytes("small") == expected
    (small,) = [c for c in build_topology(cfg).components if c.name == "small"]
    assert arg_value(list(small.args), "--kv-cache-memory-bytes") == str(expected)
    with pytest.raises(KeyError):
        sizing.kv_cache_bytes("no-such-group")


def test_a_kv_cache_that_cannot_hold_one_max_length_request_fails(
    raw_config: Callable[[str], Raw],
) -> None:
    """vLLM 0.31.0 refuses to start then (check_enough_kv_cache_memory); without maxModelLen it
    uses Qwen3-0.6B's max_position_embeddings, 40,960, more than the seed's shares hold."""
    raw = raw_config("kv-routing")
    del raw["model"]["maxModelLen"]
    with pytest.raises(StackConfigError) as info:
        validate_stack("kv-routing", raw)
    (problem,) = [p for p in info.value.problems if p.key == "model.maxModelLen"]
    assert problem.value is None
    # worker-8gb: 1,599,628,902 B // (114,688 B x 16) = 871 blocks, one held back: 870 x 16.
    assert "max model length, 40,960 tokens" in problem.message
    assert "'worker-24gb' 29,648, 'worker-8gb' 13,920" in problem.message
    assert "Set model.maxModelLen to at most 13920 (" in problem.message  # a value it takes
    # worker-8gb's 2 replicas share its GPU: 2 x 0.82 would overcommit it, so it is not offered
    assert "to 0.82 would overcommit its GPU" in problem.message
    assert problem.fixes == (("model.maxModelLen=13920",),)
    raw["model"]["maxModelLen"] = 13_920
    for worker in raw["topology"]["workers"]:  # the floor with 256 x 40,960 tokens' tables
        worker["memoryLimit"] = "3624Mi"
    validate_stack("kv-routing", raw)
    # The share it names as not enough on its own: it holds 40,960 tokens, the GPU fails.
    share = re.search(r"raising gpuMemoryUtilization of 'worker-8gb' to ([\d.]+)", problem.message)
    assert share is not None
    del raw["model"]["maxModelLen"]
    raw["topology"]["workers"][1]["gpuMemoryUtilization"] = float(share[1])
    with pytest.raises(StackConfigError) as again:
        validate_stack("kv-routing", raw)
    assert "'worker-8gb'" not in str(again.value)  # the 8 GB worker holds it now
    raw["topology"]["workers"][1]["gpuMemoryUtilization"] = 0.45
    raw["model"]["maxModelLen"] = 13_920
    raw["model"]["maxModelLen"] = 13_921
    with pytest.raises(StackConfigError):
        validate_stack("kv-routing", raw)
    raw["engine"] = {"kind": "mocker"}
    validate_stack("kv-routing", raw)  # the mocker has no such check


@pytest.mark.parametrize("stack", DYNAMO_STACKS)
def test_the_shipped_stacks_cap_the_model_length(rendered: dict[str, Rendered], stack: str) -> None:
    for component in components(rendered[stack]).values():
        if component["type"] != "frontend":
            args = main_container(component["podTemplate"]["spec"])["args"]
            assert arg_value(args, "--max-model-len") == "8192"
