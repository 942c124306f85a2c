"""Workers of several GPUs (``tensorParallelSize``): what they render, how they are sized and
checked, and what is refused.

The stack: Llama-3.3-70B on one node of eight H100 SXM, a prefill and a decode worker of four
GPUs each, KV through GPU buffers (no host mirror)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from crd_schema import schema_errors, strict_validator
from test_stack_render import arg_value, components, main_container
from test_stack_schemas import KUBERNETES_VERSION
from upstream_files import DGD_CRD, upstream_file

from manifests.graph import dgd_manifest, vllm_deployment_manifests
from simulator.hardware import run_topology
from simulator.provenance import provenance
from stackmodel.errors import StackConfigError
from stackmodel.models import KNOWN_MODELS
from stackmodel.stack_warnings import same_node_link_warnings
from stackmodel.topology import build_topology
from stackmodel.validation import validate_stack
from testbed.component_diff import diff_lines
from testbed.render import render_stack
from testbed.render_files import diff_rendered

Raw = dict[str, Any]
LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def tp_stack(raw: Raw, tp: int = 4) -> Raw:
    """disagg-same-node moved to one 8 x H100 node with 70B workers of ``tp`` GPUs."""
    raw["nodeClasses"] = {
        "h100": {
            "nodeSelector": {"dynamo-testbed/node-class": "h100"},
            "gpuMemoryGiB": 80,
            "gpusPerNode": 8,
            "gpu": "h100-sxm",
        }
    }
    raw["model"] = {"name": LLAMA_70B, "maxModelLen": 8192}
    for w in raw["topology"]["workers"]:
        w.update(
            nodeClass="h100",
            replicas=1,
            tensorParallelSize=tp,
            gpuMemoryUtilization=0.9,
            sharedMemorySize="2Gi",
            memoryLimit="32Gi",
        )
        w["kvTransfer"]["bufferDevice"] = "cuda"
        w["env"]["UCX_TLS"] = "tcp,self,cuda"
    return raw


@pytest.fixture
def tp_raw(raw_config: Callable[[str], Raw]) -> Raw:
    return tp_stack(raw_config("disagg-same-node"))


def problems(stack: str, raw: Raw) -> dict[str, str]:
    with pytest.raises(StackConfigError) as info:
        validate_stack(stack, raw)
    found: dict[str, str] = {}
    for p in info.value.problems:
        found[p.key] = f"{found[p.key]} | {p.message}" if p.key in found else p.message
    return found


def test_a_tensor_parallel_worker_asks_for_its_gpus_and_says_its_size(
    tp_raw: Raw, project_with: Callable[[str, Raw], Path]
) -> None:
    rendered = render_stack("tp", project_with("tp", tp_raw))
    for name in ("prefill", "decode"):
        component = components(rendered)[name]
        container = main_container(component["podTemplate"]["spec"])
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert arg_value(container["args"], "--tensor-parallel-size") == "4"
        assert component["sharedMemorySize"] == "2Gi"
    assert {r["component"]: r["gpus"] for r in rendered.outputs["placement"]} == {
        "frontend": 0,
        "prefill": 4,
        "decode": 4,
    }


def test_the_seed_stacks_stay_one_gpu_per_worker(rendered: dict[str, Any]) -> None:
    for stack in ("kv-routing", "disagg-same-node", "disagg-cross-node"):
        for name, component in components(rendered[stack]).items():
            container = main_container(component["podTemplate"]["spec"])
            assert "--tensor-parallel-size" not in container.get("args", []), (stack, name)


def test_a_tensor_parallel_dgd_validates_against_the_crd(tp_raw: Raw) -> None:
    crd = upstream_file(DGD_CRD)
    plan = validate_stack("tp", tp_raw)
    dgd = dgd_manifest(plan.cfg, build_topology(plan), with_hf_token=True)
    assert schema_errors(strict_validator(crd, "v1beta1"), dgd) == []


def test_tensor_parallel_deployments_validate_against_kubernetes(tp_raw: Raw) -> None:
    tp_raw["topology"] = {
        "kind": "vllm-service",
        "name": "tp",
        "workers": [
            {
                "name": "vllm",
                "role": "aggregated",
                "replicas": 2,
                "nodeClass": "h100",
                "tensorParallelSize": 4,
                "sharedMemorySize": "2Gi",
                "memoryLimit": "32Gi",
            }
        ],
    }
    cfg = validate_stack("tp", tp_raw)
    (deployment,) = vllm_deployment_manifests(cfg.cfg, build_topology(cfg), with_hf_token=False)
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}


def test_weights_and_kv_heads_split_over_the_gpus(tp_raw: Raw) -> None:
    sizing = validate_stack("tp", tp_raw).sizing
    row = sizing.worker_kv("decode")
    weights_per_gpu = math.ceil(KNOWN_MODELS[LLAMA_70B].num_parameters * 2 / 4)
    assert weights_per_gpu == 35_276_853_248
    # floor(0.9 x 80 GiB) - a quarter of the weights - 1 GiB activation overhead, per GPU
    assert row.kv_cache_budget_bytes == math.floor(0.9 * 80 * 2**30) - weights_per_gpu - 2**30
    assert row.kv_cache_budget_bytes == 40_958_816_256
    assert row.kv_bytes_per_token_per_gpu == 80 * 2 * 128 * 2 * 2  # 2 of 8 KV heads per GPU
    assert row.kv_capacity_tokens == 40_958_816_256 // 81_920 == 499_985
    # Every GPU holds a quarter of each token: the KV that moves is the model's whole.
    assert sizing.kv_bytes_per_token == 327_680
    assert sizing.report.kv_bytes_per_request == 327_680 * 2371


def test_replicated_kv_heads_move_once_per_gpu(tp_raw: Raw) -> None:
    # A model of 2 KV heads on 4 GPUs: each head on two GPUs (vLLM's QKVParallelLinear).
    geometry = {
        "numLayers": 28,
        "numKvHeads": 2,
        "headDim": 128,
        "numParameters": 1_500_000_000,
        "hiddenSize": 2048,
        "numAttentionHeads": 16,
    }
    tp_raw["model"] = {"name": "example/two-kv-heads", "maxModelLen": 8192, "geometry": geometry}
    sizing = validate_stack("tp", tp_raw).sizing
    assert sizing.worker_kv("prefill").kv_bytes_per_token_per_gpu == 28 * 1 * 128 * 2 * 2
    assert sizing.geometry.kv_bytes_per_token == 28 * 2 * 128 * 2 * 2 == 28_672
    assert sizing.kv_bytes_per_token == 4 * 14_336 == 2 * 28_672


def test_a_host_buffered_tensor_parallel_worker_mirrors_every_gpu(tp_raw: Raw) -> None:
    for w in tp_raw["topology"]["workers"]:
        w["kvTransfer"]["bufferDevice"] = "cpu"
    found = problems("tp", tp_raw)
    # 31,249 whole blocks of 16 tokens x 81,920 B on each of the 4 GPUs
    mirror = 4 * 31_249 * 16 * 81_920
    assert mirror == 163_834_757_120
    assert "host mirror 156245Mi (163,834,757,120 B)" in found["topology.workers[0].memoryLimit"]


def test_the_simulation_gives_each_worker_its_gpus_and_all_reduces(tp_raw: Raw) -> None:
    topology = run_topology(validate_stack("tp", tp_raw))
    prefill, decode = topology.workers
    assert (prefill.gpu, decode.gpu) == ("h100/0", "h100/4")
    assert prefill.host_name == decode.host_name == "h100/node-0"
    tensor_parallel = decode.step.tensor_parallel
    assert tensor_parallel is not None
    assert (tensor_parallel.size, tensor_parallel.hidden_size) == (4, 8192)
    assert tensor_parallel.link_bytes_per_s == 450e9  # NVLink 4: 900 GB/s both directions
    assert decode.step.geometry.weight_bytes == 35_276_853_248
    assert topology.kv_bytes_per_token == 327_680


@pytest.mark.parametrize(
    ("change", "key", "words", "fix"),
    [
        (
            lambda raw: raw["nodeClasses"]["h100"].update(timeSlicing={"replicasPerGpu": 2}),
            "topology.workers[0].tensorParallelSize",
            "time-slices its GPUs",
            lambda raw: raw["nodeClasses"]["h100"].pop("timeSlicing"),
        ),
        (
            lambda raw: raw["nodeClasses"]["h100"].update(gpusPerNode=2, nodes=4),
            "topology.workers[0].tensorParallelSize",
            "has gpusPerNode 2; lower tensorParallelSize to at most 2",
            lambda raw: [w.update(tensorParallelSize=2) for w in raw["topology"]["workers"]],
        ),
        (
            lambda raw: raw["topology"]["workers"][1].update(sharedMemorySize="256Mi"),
            "topology.workers[1].sharedMemorySize",
            "set sharedMemorySize to at least 2Gi",
            lambda raw: raw["topology"]["workers"][1].update(sharedMemorySize="2Gi"),
        ),
        (
            lambda raw: [w.update(tensorParallelSize=3) for w in raw["topology"]["workers"]],
            "topology.workers[0].tensorParallelSize",
            "64 attention heads divisible by the tensor-parallel size",
            lambda raw: [w.update(tensorParallelSize=2) for w in raw["topology"]["workers"]],
        ),
        (
            lambda raw: raw["topology"]["workers"][1].update(tensorParallelSize=2),
            "topology.workers[0].tensorParallelSize",
            "Decode TP cannot be smaller than prefill TP",
            lambda raw: raw["topology"]["workers"][1].update(tensorParallelSize=4),
        ),
        (
            lambda raw: (
                raw["nodeClasses"]["h100"].update(gpusPerNode=6, nodes=2),
                raw["topology"]["workers"][1].update(replicas=2),
            ),
            "topology.workers[1].replicas",
            "each pod's GPUs must be on one node",
            lambda raw: raw["nodeClasses"]["h100"].update(gpusPerNode=8),
        ),
        (  # more GPUs than the node class has: no time-slicing offered to a 4-GPU worker
            lambda raw: raw["topology"]["workers"][1].update(replicas=2),
            "topology.workers[1].replicas",
            "need 12 nvidia.com/gpu (tensorParallelSize per replica) but the class offers 8 "
            "(nodes 1 x gpusPerNode 8 x time-slicing replicas 1), and each pod's GPUs must be "
            "on one node; checked by applying it: set topology.workers[1].replicas=1; "
            "or set nodeClasses.h100.nodes=2",
            lambda raw: raw["topology"]["workers"][1].update(replicas=1),
        ),
    ],
)
def test_what_a_tensor_parallel_worker_needs_is_checked_and_the_fix_holds(
    tp_raw: Raw,
    change: Callable[[Raw], object],
    key: str,
    words: str,
    fix: Callable[[Raw], object],
) -> None:
    change(tp_raw)
    found = problems("tp", tp_raw)
    assert key in found, found
    assert words in found[key]
    fix(tp_raw)
    validate_stack("tp", tp_raw)


def test_the_shared_memory_fix_names_the_memory_limit_it_needs(tp_raw: Raw) -> None:
    tp_raw["topology"]["workers"][0].update(sharedMemorySize="256Mi", memoryLimit="3584Mi")
    message = problems("tp", tp_raw)["topology.workers[0].sharedMemorySize"]
    # 4 GPU processes x base 3,358Mi (3,328Mi with the token tables of vLLM's 1,024 request
    # slots on an H100 instead of the seed's 256) + 2Gi
    assert "raise that to at least 15480Mi" in message
    tp_raw["topology"]["workers"][0].update(sharedMemorySize="2Gi", memoryLimit="15480Mi")
    validate_stack("tp", tp_raw)


def test_a_gpu_given_by_figures_needs_its_interconnect(tp_raw: Raw) -> None:
    figures = {"name": "my-gpu", "bf16DenseTflops": 500, "memoryGbPerS": 3000}
    tp_raw["nodeClasses"]["h100"]["gpu"] = figures
    assert "add interconnect (nvlink or pcie)" in problems("tp", tp_raw)["nodeClasses.h100.gpu"]
    tp_raw["nodeClasses"]["h100"]["gpu"] = {
        **figures,
        "interconnect": "nvlink",
        "interconnectGbPerS": 450,
    }
    validate_stack("tp", tp_raw)


def test_a_tensor_parallel_change_diffs_as_gpus_and_an_argument(
    tp_raw: Raw, project_with: Callable[[str, Raw], Path]
) -> None:
    a = render_stack("tp", project_with("tp", tp_raw))
    tp_raw["topology"]["workers"][1]["tensorParallelSize"] = 2
    tp_raw["topology"]["workers"][0]["tensorParallelSize"] = 2
    b = render_stack("tp", project_with("tp", tp_raw))
    lines = diff_lines("tp", "tp", a, b, diff_rendered(a, b))
    decode = lines[lines.index("~ decode:") :]
    assert "    ~ arg --tensor-parallel-size: 4 -> 2" in decode
    assert "    ~ resources limits.nvidia.com/gpu: 4 -> 2" in decode


def test_a_simulation_says_its_workers_span_gpus_on_assumed_all_reduces(tp_raw: Raw) -> None:
    # The roofline's all-reduces (measured data time their own: tests/steptime/test_measured.py).
    text, warnings = provenance(validate_stack("tp", tp_raw), measured=False)
    assert "prefill on 4 x h100-sxm, AIConfigurator;" in text
    assert any(w.startswith("decode: tensor-parallel over 4 GPUs") for w in warnings)


def test_a_mocker_stack_still_needs_what_the_simulation_splits(tp_raw: Raw) -> None:
    tp_raw["engine"] = {"kind": "mocker"}
    geometry = {"numLayers": 80, "numKvHeads": 8, "headDim": 128, "numParameters": 7 * 10**10}
    tp_raw["model"] = {"name": "example/no-width", "maxModelLen": 8192, "geometry": geometry}
    assert (
        "needs the model's numAttentionHeads and hiddenSize"
        in problems("tp", tp_raw)["model.geometry"]
    )
    tp_raw["model"]["geometry"] |= {"hiddenSize": 8192, "numAttentionHeads": 64}
    validate_stack("tp", tp_raw)


def test_the_memory_floor_counts_a_process_per_gpu(tp_raw: Raw) -> None:
    """vLLM runs one worker process per rank (MultiprocExecutor): a 4-GPU worker's floor is 4 x
    baseMemory + /dev/shm, and a limit between one process's floor and four's is refused."""
    tp_raw["topology"]["workers"][1].update(memoryLimit="8Gi")
    found = problems("tp", tp_raw)
    (message,) = [m for m in found.values() if "memory limit" in m]
    floor = "base 4 GPU processes x 3358Mi + /dev/shm 2Gi = 15480Mi (16,231,956,480 B)"
    assert f"below its floor {floor}" in message
    assert "Raise memoryLimit to at least 15480Mi" in message
    tp_raw["topology"]["workers"][1].update(memoryLimit="15480Mi")
    validate_stack("tp", tp_raw)  # the fix holds


def test_a_same_node_gpu_buffer_path_is_not_left_at_host_tcp(tp_raw: Raw) -> None:
    """Prefill and decode on one 8-GPU node with GPU buffers and cuda in UCX_TLS: cuda_ipc
    copies over NVLink, and the default links.sameNode (host TCP, 1 GB/s) is warned with the
    rate to set; set, the warning goes and the verdict takes it."""
    (warning,) = [w.render() for w in same_node_link_warnings(validate_stack("tp", tp_raw))]
    assert warning.startswith("dynamo-testbed:links.sameNode = 'same-node-tcp': prefill 'prefill'")
    assert "over their nvlink (450 GB/s per direction on h100-sxm)" in warning
    assert "set links.sameNode: 450 (GB/s" in warning
    tp_raw["links"] = {**tp_raw.get("links", {}), "sameNode": 450}
    fixed = validate_stack("tp", tp_raw)
    assert same_node_link_warnings(fixed) == []
    assert fixed.sizing.report.disaggregation.link_bytes_per_s == 450e9
    tp_raw["topology"]["workers"][0]["env"]["UCX_TLS"] = "tcp,self,cuda_copy"  # no cuda_ipc
    tp_raw["links"]["sameNode"] = "same-node-tcp"
    assert same_node_link_warnings(validate_stack("tp", tp_raw)) == []


@pytest.mark.parametrize("tp", [4, 2])
def test_a_tensor_parallel_worker_without_shared_memory_set_gets_what_it_needs(
    raw_config: Callable[[str], Raw], tp: int
) -> None:
    """As typed: tensorParallelSize and no sharedMemorySize. The default fits the worker (2Gi)
    instead of the single-GPU 256Mi a check would refuse; held out: other sizes, a size the
    user set (kept, and refused), and a single-GPU worker (256Mi)."""
    raw = tp_stack(raw_config("disagg-same-node"), tp=tp)
    for w in raw["topology"]["workers"]:
        del w["sharedMemorySize"]
    plan = validate_stack("tp", raw)
    assert {w.shared_memory_size for w in plan.cfg.topology.workers} == {"2Gi"}
    component = next(c for c in build_topology(plan).components if c.name == "prefill")
    assert component.shared_memory_size == "2Gi"
    raw["topology"]["workers"][0]["sharedMemorySize"] = "256Mi"
    assert "topology.workers[0].sharedMemorySize" in problems("tp", raw)
    single = validate_stack("kv-routing", raw_config("kv-routing"))
    assert {w.shared_memory_size for w in single.cfg.topology.workers} == {"256Mi"}
