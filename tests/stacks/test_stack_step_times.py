"""One prefill rate: ``testbed render``'s "will disaggregation pay" verdict and ``testbed
simulate``'s timing read the same step-time model, for an L40S stack: two nodes with one 48 GB
L40S each, 10 GbE, Llama-3.1-8B-Instruct."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simulator.calibration import CONSTANTS
from simulator.hardware import run_topology
from simulator.timing_model import SimRequest, simulate_run
from stackmodel.published import DYNAMO_LLAMA_70B_ONE_NODE
from stackmodel.validation import validate_stack
from steptime.roofline import decode_floor_s
from testbed.render import render_stack

STACK = "l40s-kv"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def l40s_stack(raw: dict[str, Any], gpu: object = "l40s") -> dict[str, Any]:
    """kv-routing, moved to two L40S nodes on 10 GbE, serving Llama-3.1-8B."""
    node_class = raw["nodeClasses"]["gpu-24gb"]
    node_class.update(gpuMemoryGiB=48, nodes=2, gpu=gpu)
    del node_class["timeSlicing"]
    raw["nodeClasses"] = {"l40s": node_class}
    raw["model"]["name"] = LLAMA
    raw["links"] = {"crossNode": "10gbe"}
    raw["topology"]["workers"] = [
        {
            "name": "worker",
            "role": "aggregated",
            "replicas": 2,
            "nodeClass": "l40s",
            "gpuMemoryUtilization": 0.9,
            "memoryLimit": "3584Mi",
        }
    ]
    if gpu is None:
        del node_class["gpu"]
    return raw


def test_render_and_simulate_use_one_prefill_rate(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    raw = l40s_stack(raw_config("kv-routing"))
    verdict = render_stack(STACK, project_with(STACK, raw)).outputs["sizing"]["disaggregation"]
    assert "worker on l40s: dense BF16 roofline" in verdict["prefill_source"]
    topology = run_topology(validate_stack(STACK, raw))
    step = topology.workers[0].step
    # one cold request alone: TTFT = request overhead + its engine steps (host, weights) and
    # its prefill; the L40S's 2,048-token step budget (vLLM's default under 70 GiB) splits the
    # prompt over two steps
    prompt = 2_371
    assert step.max_batched_tokens == 2_048
    request = SimRequest(0, 0, 2_134, prompt, cached_tokens=0, output_tokens=8)
    (outcome,) = simulate_run(topology, CONSTANTS, [request], 1).outcomes
    prefill_s = (
        outcome.token_s[0]
        - outcome.sent_s
        - CONSTANTS.request_overhead_s
        - 2 * (step.host_s + step.decode_s([]))
    )
    assert prompt / prefill_s == pytest.approx(verdict["prefill_tokens_per_s"], rel=1e-6)
    # no token gap below the decode floor: the weights alone need 18.6 ms
    gaps = [b - a for a, b in zip(outcome.token_s, outcome.token_s[1:], strict=False)]
    assert min(gaps) >= decode_floor_s(step.gpu, step.geometry, [prompt]) > 0.0186


def test_a_node_class_without_a_gpu_says_which_default_it_got(
    raw_config: Callable[[str], dict[str, Any]],
    project_with: Callable[[str, dict[str, Any]], Path],
) -> None:
    raw = l40s_stack(raw_config("kv-routing"), gpu=None)
    verdict = render_stack(STACK, project_with(STACK, raw)).outputs["sizing"]["disaggregation"]
    assert "worker on rtx-4090, the default" in verdict["summary"]


def test_an_unknown_gpu_is_a_one_line_error(
    raw_config: Callable[[str], dict[str, Any]],
) -> None:
    with pytest.raises(Exception, match=r"nodeClasses\.l40s\.gpu.*unknown GPU 'l40'") as info:
        validate_stack(STACK, l40s_stack(raw_config("kv-routing"), gpu="l40"))
    assert "known: a10, a100-40gb" in str(info.value)


def test_the_step_budget_is_vllms_api_server_default_unless_the_args_set_one(
    raw_config: Callable[[str], dict[str, Any]],
) -> None:
    # vLLM's EngineArgs.get_batch_defaults for UsageContext.OPENAI_API_SERVER: 16,384 tokens a
    # step on a GPU of >= 160 GiB, 8,192 on one of >= 70 GiB that is not an A100, 2,048 on any
    # other
    raw = raw_config("kv-routing")
    seed = validate_stack("kv-routing", raw)
    assert {seed.group(g.name).max_batched_tokens for g in seed.cfg.topology.workers} == {2_048}
    h100 = DYNAMO_LLAMA_70B_ONE_NODE.plan("disaggregated")
    assert h100.group("prefill-0").step.max_batched_tokens == 8_192
    raw["nodeClasses"]["gpu-24gb"].update(gpu="a100-sxm-80gb", gpuMemoryGiB=80)
    for worker in raw["topology"]["workers"]:  # room for the token tables of 1,024 slots
        worker["memoryLimit"] = "4Gi"
    a100 = validate_stack("a100", raw)
    assert a100.group(a100.cfg.topology.workers[0].name).max_batched_tokens == 2_048
    b200 = {"name": "b200", "bf16DenseTflops": 2250, "memoryGbPerS": 8000}
    raw["nodeClasses"]["gpu-24gb"].update(gpu=b200, gpuMemoryGiB=180)
    huge = validate_stack("b200", raw)
    assert huge.group(huge.cfg.topology.workers[0].name).max_batched_tokens == 16_384
    raw["nodeClasses"]["gpu-24gb"].update(gpu="a100-sxm-80gb", gpuMemoryGiB=80)
    # the last of the engine's then the group's extraArgs wins, in either spelling
    raw["engine"]["extraArgs"] = ["--max-num-batched-tokens=4096"]
    assert validate_stack("args", raw).group("worker-24gb").max_batched_tokens == 4_096
    raw["topology"]["workers"][0]["extraArgs"] = ["--max_num_batched_tokens", "16384"]
    assert validate_stack("args", raw).group("worker-24gb").max_batched_tokens == 16_384
